"""Observability for long runs: Prometheus metrics, OpenTelemetry traces, JSON logs.

- :mod:`shipping_async.telemetry.metrics` (extra ``[metrics]``): ``Metrics`` subscribes
  Prometheus counters, histograms and gauges to the client hooks and serves ``/metrics``.
- :mod:`shipping_async.telemetry.traces` (extra ``[otel]``): ``ClientTracing``, one span
  per API call; ``job_stage`` (in ``_scope``) opens one span per job stage.
- :mod:`shipping_async.telemetry.logs`: ``SHIPPING_LOG_FORMAT=json``, one JSON object per
  log line.

Importing this package needs neither extra and imports nothing: each module imports
the optional library it uses.
"""
