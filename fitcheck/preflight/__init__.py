"""CI preflight: machine requirements, plan files and GitHub Actions output for ``fitcheck check``.

Pure modules (no printing, no probing):

    requirements   parse ``"vram>=24GiB"`` and judge it against a Machine
    plan_file      read a plan TOML (several cases) into validated cases
    github         GitHub Actions annotations and the Markdown step summary
    style          colour for verdict words, off for NO_COLOR and non-terminals

The CLI edge that prints and writes files is :mod:`fitcheck.preflight.emit`.
"""
