"""`trace-join collect`, the live service around the library: the OTLP receivers, the tailer of
watched files, the /perf_metrics scrapers, the one writer thread they feed, the query endpoint that
serves readers while it holds the store, and the snapshots Grafana reads."""
