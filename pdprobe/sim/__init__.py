"""pdprobe sim layer."""
