"""Tools for testing cera and its plugins: the numpy reference backend
(`cera.testing.reference`) and the conformance suite every backend runs
(`cera.testing.conformance`)."""
