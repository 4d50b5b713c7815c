"""pdprobe collectors layer."""
