"""Shell completion values for MODEL and --profile (click calls these while the user presses Tab).

Enable it once per shell (``eval "$(_FITCHECK_COMPLETE=bash_source fitcheck)"``, docs/configuration.md); then
``fitcheck qwen<Tab>`` offers the catalog's ids and aliases and ``--profile rtx<Tab>`` the
shipped and saved profiles.  Reading the catalog and the profile folders takes a few
milliseconds; nothing is probed and no network is used.
"""

from __future__ import annotations

from click.shell_completion import CompletionItem

MAX_ITEMS = 200  # a shell shows a page, not the whole catalog


def _matching(names, incomplete: str) -> list[str]:
    low = incomplete.lower()
    seen: dict[str, None] = {}
    for name in names:
        if name.lower().startswith(low):
            seen.setdefault(name, None)
    return list(seen)[:MAX_ITEMS]


def model_names() -> list[str]:
    """Every name MODEL accepts from the catalog (the user's extra models included): ids, then aliases."""
    from fitcheck.model.catalog import load_catalog

    entries = load_catalog().entries
    return [*(e.hf_id for e in entries), *(a for e in entries for a in e.aliases)]


def model_completions(incomplete: str) -> list[CompletionItem]:
    # an id is matched by its organisation or by its name ("qwen2.5" finds "Qwen/Qwen2.5-7B")
    names = model_names()
    found = _matching(names, incomplete)
    if "/" not in incomplete:
        found += [n for n in _matching([n.split("/", 1)[-1] for n in names if "/" in n], incomplete)
                  if n not in found]
    return [CompletionItem(n) for n in found[:MAX_ITEMS]]


def profile_completions(incomplete: str) -> list[CompletionItem]:
    from fitcheck.profiles import profile_names

    if "/" in incomplete or incomplete.endswith(".toml"):
        return [CompletionItem(incomplete, type="file")]
    return [CompletionItem(n) for n in _matching(profile_names(), incomplete)]
