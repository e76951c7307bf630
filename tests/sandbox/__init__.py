"""Tests of the sandbox: the simulated API, its control API, CLI and pytest plugin."""
