"""Differential property tests: results compared with a reference on generated valid inputs."""
