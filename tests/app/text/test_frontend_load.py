"""The front end loads only what misaki reads from spaCy (`app.text.frontend.SPACY_EXCLUDED`): the pipeline
without its parser, lemmatizer, entity recognizer and the tokenizer's files, which would only repeat the
English defaults spaCy builds first. If an upgrade of the pipeline package makes its tokenizer differ, this
fails, and the tokenizer must be read from the package again."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import spacy

from app.text.frontend import SPACY_ENABLED, SPACY_EXCLUDED, SPACY_PIPELINE
from bench import corpus
from tests.conftest import ROOT

TEXTS = ["Welcome back.", "I read it yesterday; I'll read it again at 3:30 p.m. (don't wait!)",
         "e-mail me at test@example.com or visit https://example.com/a-b, U.S.A.", "Dr. Smith's 2nd-floor office."]


def test_the_pipeline_as_loaded_tokenizes_and_tags_like_the_whole_package() -> None:
    whole = spacy.load(SPACY_PIPELINE, enable=SPACY_ENABLED)
    lean = spacy.load(SPACY_PIPELINE, enable=SPACY_ENABLED, exclude=SPACY_EXCLUDED)
    assert lean.pipe_names == whole.pipe_names == SPACY_ENABLED
    assert lean.tokenizer.rules == whole.tokenizer.rules
    for attr in ("prefix_search", "suffix_search", "infix_finditer", "token_match", "url_match"):
        assert _pattern(getattr(lean.tokenizer, attr)) == _pattern(getattr(whole.tokenizer, attr)), attr
    texts = TEXTS + [u.text for u in corpus.load(corpus.DEFAULT).utterances]
    for text in texts:
        assert [(t.text, t.tag_, t.whitespace_) for t in lean(text)] == \
            [(t.text, t.tag_, t.whitespace_) for t in whole(text)], text
    assert json.dumps(lean.meta["name"]) == json.dumps(whole.meta["name"])


def _pattern(method: Any) -> str | None:
    """The regular expression behind a tokenizer's bound ``search``/``finditer``/``match`` (None when unset)."""
    return None if method is None else str(method.__self__.pattern)


PROBE = """
import sys
from pathlib import Path
from app.text.frontend import Frontend
frontend = Frontend(Path(sys.argv[1]))
frontend.load(("en-us",))
assert frontend.phonemize("Welcome back.", "en-us") == "wˈɛlkəm bˈæk.", frontend.phonemize("Welcome back.", "en-us")
loaded = sorted(m for m in ("weasel", "typer", "spacy.cli.download") if m in sys.modules)
assert not loaded, f"imported for nothing: {loaded}"
import spacy
assert callable(spacy.cli.download) and "weasel" in sys.modules  # still there, imported once used
from spacy.cli.info import info
assert info.__module__ == "spacy.cli.info"
"""


def test_loading_the_front_end_leaves_spacys_command_line_unimported_until_used(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", PROBE, str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
