"""Thin argparse front ends, one module per command."""
