"""pdprobe analysis layer."""
