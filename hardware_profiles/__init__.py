"""Shipped hardware profiles (TOML), installed as the package ``fitcheck.hardware_profiles``.

This file makes the folder a regular package so ``importlib.resources.files`` finds it in a
wheel, an editable install and on Python 3.10 alike.  The schema is in README.md here.
"""
