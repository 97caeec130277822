"""The remote protocol: each command sent over SSH (every value quoted here) and its output parsers."""
