"""Services: the use cases behind each command (collect -> analyse -> judge -> report)."""
