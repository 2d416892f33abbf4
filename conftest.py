"""Plugins every test suite shares (each suite runs in its own environment, from this root)."""

pytest_plugins = ["tests.reliability"]
