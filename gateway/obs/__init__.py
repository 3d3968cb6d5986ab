"""What the gateway tells its operators: Prometheus metrics and structured logs."""
