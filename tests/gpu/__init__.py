"""GPU-host tests (a package, so its conftest does not shadow tests/unit/conftest.py as module `conftest`)."""
