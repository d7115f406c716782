"""fitcheck: will this model run (or train) on this machine, and if not, what will?

The package is importable without the CLI.  Public entry points live in their own modules and
are imported lazily so that ``import fitcheck`` stays cheap:

- :func:`fitcheck.probe.probe` reads this machine into a :class:`fitcheck.machine.Machine`;
- :mod:`fitcheck.profiles` loads and saves hardware profiles (the same schema);
- :mod:`fitcheck.model` resolves what people type into a :class:`fitcheck.model.spec.ModelSpec`;
- :mod:`fitcheck.estimate` turns a model and a request into bytes, and a verdict.
"""

__version__ = "0.1.0"
