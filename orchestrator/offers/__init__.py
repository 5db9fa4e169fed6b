"""offers."""
