"""Test harness: real servers on loopback, real databases."""
