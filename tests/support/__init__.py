"""Helpers shared by the test suites: waiting on conditions and inspecting /proc."""
