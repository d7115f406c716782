"""README and docs/ examples stay true: every `$ fitcheck ...` console example in README.md and
docs/*.md runs, and examples that do not depend on this machine (a hardware profile, `where`,
`models`) print exactly what the page shows. `python dev/update_readme_examples.py` regenerates
them. Relative links between the pages resolve."""

import re
import shlex
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from fitcheck.cli import cli

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
sys.path.insert(0, str(ROOT / "dev"))
from update_readme_examples import documents, machine_independent  # noqa: E402

BLOCK = re.compile(r"```console\n(.*?)```", re.S)
DOCS = documents()


def examples():
    out = []
    for page in DOCS:
        out += [(f"{page.name}: {cmd}", shown) for cmd, shown in _examples(page.read_text())]
    return out


def _examples(text: str):
    out = []
    for block in BLOCK.findall(text):
        lines = block.splitlines()
        i = 0
        while i < len(lines):
            if lines[i].startswith("$ fitcheck"):
                cmd = lines[i][2:]
                j = i + 1
                while j < len(lines) and not lines[j].startswith("$ "):
                    j += 1
                out.append((cmd, "\n".join(lines[i + 1:j])))
                i = j
            else:
                i += 1
    return out


def test_readme_opens_with_the_two_setup_commands():
    text = README.read_text()
    assert "pip install . && fitcheck qwen-7b" in text
    assert "pip install -e '.[test]' && pytest" in text
    ci = (README.parent / ".ci" / "run").read_text()
    assert "pip install -e '.[test]' && pytest" in ci


@pytest.mark.parametrize("labelled, shown", examples(), ids=lambda v: v if isinstance(v, str) and ": fitcheck" in v else "")
def test_readme_example(labelled, shown):
    cmd = labelled.split(": ", 1)[1]
    args = shlex.split(cmd)[1:]
    result = CliRunner().invoke(cli, args, prog_name="fitcheck")
    assert result.exit_code in (0, 1), result.output
    if machine_independent(cmd) and shown.strip():
        assert result.output.rstrip() == shown.rstrip()


def test_every_docs_page_has_a_generated_example_or_none_and_readme_links_them_all():
    readme = README.read_text()
    for page in DOCS[1:]:
        assert f"](docs/{page.name}" in readme, page.name
        assert "](../README.md)" in page.read_text(), page.name  # and back


LINK = re.compile(r"\]\(([^)#\s]+)?(?:#([^)\s]+))?\)")


def _anchors(text: str) -> set[str]:
    heads = re.findall(r"^#+ (.+)$", re.sub(r"```.*?```", "", text, flags=re.S), re.M)
    return {re.sub(r"[^a-z0-9 _-]", "", h.lower().replace("`", "")).replace(" ", "-") for h in heads}


@pytest.mark.parametrize("page", DOCS, ids=lambda p: p.name)
def test_relative_links_resolve(page):
    text = page.read_text()
    for target, anchor in LINK.findall(text):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path = (page.parent / target).resolve() if target else page
        assert path.exists(), f"{page.name}: broken link {target}"
        if anchor and path.suffix == ".md":
            assert anchor in _anchors(path.read_text()), f"{page.name}: no heading #{anchor} in {target or page.name}"


def test_readme_options_table_is_the_vocabulary():
    from update_readme_examples import OPTIONS, options_table

    sections = [s for page in documents() for s in OPTIONS.findall(page.read_text())]
    assert sections, "a page holds the options table"
    (section,) = sections
    assert section[1] == options_table(), "run python dev/update_readme_examples.py"

