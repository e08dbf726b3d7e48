"""vtrepro."""
