"""Checking hardware profiles against public measurements: source registry, fits, errors, report."""
