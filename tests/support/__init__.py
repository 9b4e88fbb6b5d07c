"""Helpers the test files share: servers, runners, waits, fixtures and oracles (CONTRIBUTING.md)."""
