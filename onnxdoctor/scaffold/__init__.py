"""Custom-op package generator."""
