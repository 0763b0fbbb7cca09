"""Real A2A peers that the end-to-end tests run as subprocesses on loopback."""
