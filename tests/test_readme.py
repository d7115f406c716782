"""README and docs/ stay true: every transcript in README.md and docs/*.md is generated and checked.

A ```console block's `$ fitcheck ...` commands answer for no particular machine (a hardware profile,
`where`, `models`, `profiles`, a plan whose cases name profiles) and print exactly what the page shows;
a `fitcheck interactive` session is its answers fed back in; a ```pycon block is run statement by
statement; a plan's TOML is the page's own block (`<!-- file: NAME -->`); the options and accuracy tables
are their generators' output. No other fenced block may look like fitcheck output. `python
dev/update_readme_examples.py` regenerates all of them. Relative links between the pages resolve, and
README and the docs index link every page."""

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
INDEX = ROOT / "docs" / "index.md"
sys.path.insert(0, str(ROOT / "dev"))
import update_readme_examples as gen  # noqa: E402

DOCS = gen.documents()


def _generated():
    out = []
    for page in DOCS:
        text = page.read_text()
        out += [(page, fence) for fence in gen.generated_fences(text)]
    return out


GENERATED = _generated()


def test_readme_opens_with_the_two_setup_commands():
    text = README.read_text()
    assert "pip install . && fitcheck qwen-7b" in text
    assert "pip install -e '.[test]' && pytest" in text
    ci = (README.parent / ".ci" / "run").read_text()
    assert "pip install -e '.[test]' && pytest" in ci


def test_readme_is_short():
    assert len(README.read_bytes()) <= 25_000, "README.md is for a newcomer: move detail to a page under docs/"


@pytest.mark.parametrize("page, fence", GENERATED, ids=[f"{p.name}:{f.line}" for p, f in GENERATED])
def test_transcript_is_what_fitcheck_prints(page, fence):
    files = gen.page_files(page.read_text())
    assert gen.regenerate(fence, files) == fence.body, (
        f"{page.name} line {fence.line} is stale: run python dev/update_readme_examples.py")


def test_every_kind_of_transcript_is_covered():
    kinds = {"plan": False, "interactive": False, "pycon": False}
    for _page, fence in GENERATED:
        if fence.lang == "pycon":
            kinds["pycon"] = True
        elif gen.interactive_input(fence) is not None:
            kinds["interactive"] = True
        elif any("--plan" in cmd for cmd, _ in gen.commands(fence.body)):
            kinds["plan"] = True
    assert all(kinds.values()), kinds


# What fitcheck's output looks like: a fenced block holding any of these is output, and must be generated.
OUTPUT_SIGNS = [
    re.compile(p, re.M) for p in (
        r"^\$ ",                                   # a shell prompt: a transcript
        r"^>>> ",                                  # a Python prompt: a transcript
        r"Verdict:", r"\bDOES NOT FIT\b", r"\bCANNOT RUN HERE\b", r"^FITS\b", r"\bTIGHT\b",
        r"Largest that fits", r"What fits instead", r"^(Model|Machine|Request|Speed|Download):  ",
        r"\d(\.\d+)? GiB\b", r"\d tok/s", r"^Requirement \S+: (met|FAILED|unknown)", r"^::(error|warning|notice)",
        r"\[… .* …\]",                             # an abridged transcript
    )
]


def _unchecked_output():
    found = []
    for page in DOCS:
        for fence in gen.fences(page.read_text()):
            if fence.lang in ("console", "pycon"):
                continue
            for sign in OUTPUT_SIGNS:
                if sign.search(fence.body):
                    found.append(f"{page.name} line {fence.line} (```{fence.lang}): {sign.pattern}")
                    break
    return found


def test_no_fenced_block_shows_output_that_is_not_generated():
    assert _unchecked_output() == []


def test_the_output_check_would_catch_a_hand_written_transcript(tmp_path, monkeypatch):
    page = tmp_path / "page.md"
    page.write_text("```text\n$ fitcheck qwen-7b\nVerdict:  FITS — GPU0 needs 7.62 GiB\n```\n")
    monkeypatch.setattr(sys.modules[__name__], "DOCS", [page])
    assert len(_unchecked_output()) == 1


def test_a_command_about_this_machine_cannot_be_a_transcript():
    text = "```console\n$ fitcheck qwen-7b\nVerdict:  FITS\n```\n"
    with pytest.raises(gen.DocsError, match="answers for this machine"):
        gen.regenerated(text)
    assert gen.machine_independent("fitcheck qwen-7b --profile rtx-4090")
    assert gen.machine_independent("fitcheck where qwen-7b") and gen.machine_independent("fitcheck models --show qwen-7b")
    assert not gen.machine_independent("fitcheck models --fits") and not gen.machine_independent("fitcheck models --local")
    assert not gen.machine_independent("fitcheck probe") and not gen.machine_independent("fitcheck check --require gpus>=1")
    plan = '[defaults]\nprofile = "t4"\n[[case]]\nmodel = "qwen-7b"\n'
    assert gen.machine_independent("fitcheck check --plan p.toml", {"p.toml": plan})
    assert not gen.machine_independent("fitcheck check --plan p.toml", {"p.toml": plan.replace('profile = "t4"', "")})


def test_every_docs_page_is_linked_from_readme_and_the_index_and_links_back():
    readme, index = README.read_text(), INDEX.read_text()
    for page in DOCS[1:]:
        assert f"](docs/{page.name}" in readme, page.name
        if page != INDEX:
            assert f"]({page.name}" in index, page.name
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


@pytest.mark.parametrize("page", DOCS, ids=lambda p: p.name)
def test_no_line_of_prose_reads_as_a_heading_by_accident(page):
    # a wrapped line that starts with `#4760's log` renders as a heading
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    assert not re.findall(r"^#+[^# \n]", text, re.M)


def test_readme_options_table_is_the_vocabulary():
    sections = [s for page in DOCS for s in gen.OPTIONS.findall(page.read_text())]
    assert sections, "a page holds the options table"
    (section,) = sections
    assert section[1] == gen.options_table(), "run python dev/update_readme_examples.py"


def test_the_accuracy_page_holds_the_generated_accuracy_table():
    begin, end = gen.accuracy_markers()
    text = (ROOT / "docs" / "accuracy.md").read_text()
    assert begin in text and end in text
    assert text.split(begin, 1)[1].split(end, 1)[0].strip() == gen.accuracy_table(), (
        "docs/accuracy.md's table is stale: run python dev/update_readme_examples.py")


PLACEHOLDER = re.compile(r"OWNER/|\bTODO\b|\bXXX\b|example\.com")


@pytest.mark.parametrize("path", [*DOCS, ROOT / "CHANGELOG.md", ROOT / "pyproject.toml", ROOT / "action.yml"],
                         ids=lambda p: p.name)
def test_no_placeholders(path):
    text = path.read_text()
    assert not PLACEHOLDER.findall(text), f"{path.name}: a placeholder where a real value belongs"


def test_the_measure_install_says_how_to_get_the_cpu_build_of_torch():
    for path in (README, ROOT / "docs" / "measure.md"):
        text = path.read_text()
        assert "pip install torch --index-url https://download.pytorch.org/whl/cpu" in text, path.name
        assert "pip install 'fitcheck[measure]'" in text, path.name
