"""A module a test's workers preload: whether it is in `sys.modules` tells they did."""
