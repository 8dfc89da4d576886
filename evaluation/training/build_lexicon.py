"""Derive the compact lexicon that ships with the package from WordNet 3.0.

    cd /tmp && apt-get download wordnet-base && dpkg-deb -x wordnet-base_*.deb wordnet-base
    python -m evaluation.training.build_lexicon --root /tmp/wordnet-base

writes ``mlc_integrations/assets/lexicon/wordnet.json.gz`` (read by
:mod:`mlc_integrations.verify.text.lexicon`) and ``LICENSE-WordNet.txt`` beside it (the licence
text of the Debian package's copyright file). Nothing is hand-listed: every relation
comes from WordNet's own pointers.

What is kept (everything the edit classifier asks about, nothing else):

* ``lemmas``: per part of speech, lemma -> [number of senses attested in WordNet's
  sense-tagged corpus, synset indices in WordNet's sense order (most frequent first)],
  so a relation can prefer common senses;
* ``hyper``: hypernyms (and instance hypernyms) of noun and verb synsets, for
  hypernym and co-hyponym (contrast set) relations;
* ``similar``: adjective satellite -> head synsets (WordNet's adjective clusters),
  ``attribute``: adjective head -> the noun it is a value of ("short" -> length);
* ``derivation``: synset pairs of different parts of speech linked by a derivational
  pointer ("invent"/"invention", "weigh"/"weight"): one concept, another word class;
* ``antonyms``: synset pairs with a direct lemma antonym pointer, and pairs derived
  through a derivational or pertainym link of an antonymous lemma on both sides
  ("win"/"loss" from the verbs win/lose) of the same part of speech;
* ``lexname``: the lexicographer file of each synset (noun.time, noun.location,
  noun.person, noun.communication, ...), which says what kind of thing a word is;
* ``proper``: synsets that are instances (Paris, Einstein: individuals);
  ``capitalized``: other synsets WordNet writes with a capital (Monday, French);
  ``general``: synsets too general to define a contrast set
  (more than ``--general-size`` hyponyms below them);
* ``exceptions``: WordNet's morphological exception lists (children -> child,
  bigger -> big, shown -> show), used by the loader's lemmatizer.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import re
import sys
from collections import defaultdict
from pathlib import Path
from typing import Optional, Sequence

from mlc_integrations.verify.text.lexicon import DEFAULT_LEXICON_PATH, LEXICON_FORMAT, LEXICON_FORMAT_VERSION

POS_FILES = {"n": "noun", "v": "verb", "a": "adj", "r": "adv"}
DEFAULT_ROOT = Path("/tmp/wordnet-base")
# A hypernym with more hyponyms than this below it (e.g. "entity", "person", "act")
# groups words too loosely for "same kind of thing, different value".
DEFAULT_GENERAL_SIZE = 1500


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _wordnet_dir(root: Path) -> Path:
    for cand in (root / "usr" / "share" / "wordnet", root):
        if (cand / "data.noun").exists():
            return cand
    raise SystemExit(f"no WordNet database under {root} (expected usr/share/wordnet/data.noun)")


def read_lexnames(root: Path) -> list[str]:
    """Lexicographer file names by number, from the package's lexnames(5WN) page."""
    page = root / "usr" / "share" / "man" / "man5" / "lexnames.5WN.gz"
    names: dict[int, str] = {}
    with gzip.open(page, "rt", encoding="latin-1") as fh:
        for line in fh:
            m = re.match(r"^(\d\d)\t(\w+\.\w+)", line)
            if m:
                names[int(m.group(1))] = m.group(2)
    if not names or sorted(names) != list(range(len(names))):
        raise SystemExit(f"could not read the lexicographer file table from {page}")
    return [names[i] for i in range(len(names))]


class Synset:
    __slots__ = ("pos", "satellite", "offset", "lexfile", "words", "pointers")

    def __init__(self, pos: str, satellite: bool, offset: int, lexfile: int, words: list[str],
                 pointers: list[tuple[str, int, str, int, int]]) -> None:
        self.pos = pos
        self.satellite = satellite
        self.offset = offset
        self.lexfile = lexfile
        self.words = words  # as written in the data file (case kept, markers removed)
        self.pointers = pointers  # (symbol, target offset, target pos, source word, target word)


def read_data(wn: Path) -> dict[tuple[str, int], Synset]:
    """Every synset of the four data files, keyed by (pos, offset); satellites as 'a'."""
    out: dict[tuple[str, int], Synset] = {}
    for pos, name in POS_FILES.items():
        with open(wn / f"data.{name}", encoding="latin-1") as fh:
            for line in fh:
                if line.startswith("  "):
                    continue  # licence header
                f = line.split(" | ")[0].split()
                offset, lexfile = int(f[0]), int(f[1])
                w_cnt = int(f[3], 16)
                words = [re.sub(r"\((a|p|ip)\)$", "", f[4 + 2 * i]) for i in range(w_cnt)]
                k = 4 + 2 * w_cnt
                p_cnt = int(f[k])
                ptrs = []
                for j in range(p_cnt):
                    sym, toff, tpos, st = f[k + 1 + 4 * j: k + 5 + 4 * j]
                    ptrs.append((sym, int(toff), "a" if tpos == "s" else tpos, int(st[:2], 16), int(st[2:], 16)))
                out[(pos, offset)] = Synset(pos, f[2] == "s", offset, lexfile, words, ptrs)
    return out


def read_index(wn: Path) -> dict[str, dict[str, tuple[int, list[int]]]]:
    """lemma -> (senses attested in WordNet's sense-tagged corpus, synset offsets in
    sense order), per part of speech."""
    out: dict[str, dict[str, tuple[int, list[int]]]] = {}
    for pos, name in POS_FILES.items():
        d: dict[str, tuple[int, list[int]]] = {}
        with open(wn / f"index.{name}", encoding="latin-1") as fh:
            for line in fh:
                if line.startswith("  "):
                    continue
                f = line.split()
                lemma, n_syn, p_cnt = f[0], int(f[2]), int(f[3])
                offsets = f[4 + p_cnt + 2:]
                if len(offsets) != n_syn:
                    raise SystemExit(f"index.{name}: malformed line for {lemma!r}")
                d[lemma] = (int(f[4 + p_cnt + 1]), [int(o) for o in offsets])
        out[pos] = d
    return out


def read_exceptions(wn: Path) -> dict[str, dict[str, list[str]]]:
    out: dict[str, dict[str, list[str]]] = {}
    for pos, name in POS_FILES.items():
        d: dict[str, list[str]] = {}
        with open(wn / f"{name}.exc", encoding="latin-1") as fh:
            for line in fh:
                f = line.split()
                if len(f) >= 2:
                    d[f[0]] = f[1:]
        out[pos] = d
    return out


def build(root: Path, general_size: int = DEFAULT_GENERAL_SIZE) -> dict:
    wn = _wordnet_dir(root)
    lexnames = read_lexnames(root)
    data = read_data(wn)
    index = read_index(wn)
    keys = sorted(data, key=lambda k: ("nvar".index(k[0]), k[1]))
    idx = {k: i for i, k in enumerate(keys)}
    syn = [data[k] for k in keys]
    n = len(syn)

    def target(p: tuple[str, int, str, int, int]) -> int:
        return idx[(p[2], p[1])]

    hyper: list[list[int]] = [[] for _ in range(n)]
    hypo_count_children: list[list[int]] = [[] for _ in range(n)]
    similar: dict[int, list[int]] = {}
    attribute: dict[int, list[int]] = {}
    proper: set[int] = set()
    capitalized: set[int] = set()
    antonyms: set[tuple[int, int]] = set()
    # lemma-level links: (synset, word number) -> linked (synset, word number)
    deriv: dict[tuple[int, int], set[tuple[int, int]]] = defaultdict(set)
    lemma_antonyms: list[tuple[tuple[int, int], tuple[int, int]]] = []
    for i, s in enumerate(syn):
        if all(w[:1].isupper() for w in s.words):
            capitalized.add(i)
        for p in s.pointers:
            sym = p[0]
            t = target(p)
            if sym in ("@", "@i") and s.pos in "nv":
                hyper[i].append(t)
                hypo_count_children[t].append(i)
                if sym == "@i":
                    proper.add(i)
            elif sym == "&" and s.satellite:
                similar.setdefault(i, []).append(t)  # satellite -> its head (heads point back)
            elif sym == "=" and s.pos == "a":
                attribute.setdefault(i, []).append(t)
            elif sym == "!":
                antonyms.add((min(i, t), max(i, t)))
                lemma_antonyms.append(((i, p[3]), (t, p[4])))
            elif sym in ("+", "\\") and p[3] and p[4]:
                deriv[(i, p[3])].add((t, p[4]))
                deriv[(t, p[4])].add((i, p[3]))
    derivation = sorted({(min(a[0], b[0]), max(a[0], b[0])) for a, bs in deriv.items() for b in bs if a[0] != b[0]
                         and syn[a[0]].pos != syn[b[0]].pos and "+" in {q[0] for q in syn[a[0]].pointers}})
    direct = set(antonyms)
    derived: set[tuple[int, int]] = set()
    for x, y in lemma_antonyms:
        for dx in deriv.get(x, ()):
            for dy in deriv.get(y, ()):
                a, b = dx[0], dy[0]
                if a != b and syn[a].pos == syn[b].pos and (min(a, b), max(a, b)) not in direct:
                    derived.add((min(a, b), max(a, b)))
    # Size of the hyponym tree below each synset (a synset reachable by two paths counts once per path:
    # an upper bound, which is what "too general" needs).
    below = [0] * n
    order: list[int] = []
    seen = [False] * n
    for start in range(n):
        if seen[start]:
            continue
        stack = [(start, False)]
        while stack:
            node, done = stack.pop()
            if done:
                order.append(node)
                continue
            if seen[node]:
                continue
            seen[node] = True
            stack.append((node, True))
            stack.extend((c, False) for c in hypo_count_children[node] if not seen[c])
    for node in order:  # children before parents
        below[node] = sum(1 + below[c] for c in hypo_count_children[node])
    general = sorted(i for i in range(n) if below[i] > general_size)
    lemmas: dict[str, dict[str, list[int]]] = {}
    for pos, d in index.items():
        # [attested senses, synset indices...]: one flat list per lemma keeps the file small
        lemmas[pos] = {lemma: [tagged] + [idx[(pos, o)] for o in offs] for lemma, (tagged, offs) in sorted(d.items())}
    return {
        "format": LEXICON_FORMAT,
        "version": LEXICON_FORMAT_VERSION,
        "source": {"name": "WordNet 3.0", "package": "Debian wordnet-base",
                   "data_sha256_16": _data_hash(wn), "general_size": general_size,
                   "command": "python -m evaluation.training.build_lexicon"},
        "lexnames": lexnames,
        "pos": "".join(s.pos for s in syn),
        "lexname": [s.lexfile for s in syn],
        "lemmas": lemmas,
        "hyper": hyper,
        "similar": {str(k): v for k, v in sorted(similar.items())},
        "attribute": {str(k): v for k, v in sorted(attribute.items())},
        "antonyms": sorted(direct),
        "derivation": [list(p) for p in derivation],
        "derived_antonyms": sorted(derived),
        "proper": sorted(proper),
        "capitalized": sorted(capitalized - proper),
        "general": general,
        "exceptions": read_exceptions(wn),
    }


def _data_hash(wn: Path) -> str:
    h = hashlib.sha256()
    for name in sorted(POS_FILES.values()):
        for kind in ("data", "index"):
            h.update((wn / f"{kind}.{name}").read_bytes())
    return h.hexdigest()[:16]


def licence_text(root: Path) -> str:
    """The WordNet 3.0 licence stanza of the Debian package's copyright file."""
    path = root / "usr" / "share" / "doc" / "wordnet-base" / "copyright"
    text = path.read_text(encoding="utf-8")
    m = re.search(r"^License: WordNet3\.0\n((?: .*\n)+)", text, flags=re.M)
    if not m:
        raise SystemExit(f"no 'License: WordNet3.0' stanza in {path}")
    body = "\n".join("" if ln.strip() == "." else ln[1:] for ln in m.group(1).splitlines())
    return ("The lexicon in wordnet.json.gz is derived from WordNet 3.0 by\n"
            "mlc_integrations/eval/build_lexicon.py and is distributed under WordNet's licence:\n\n"
            + body.strip() + "\n")


def main(argv: Optional[Sequence[str]] = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m evaluation.training.build_lexicon", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default=str(DEFAULT_ROOT),
                    help="the extracted wordnet-base package (dpkg-deb -x wordnet-base_*.deb ROOT)")
    ap.add_argument("--output", default=str(DEFAULT_LEXICON_PATH))
    ap.add_argument("--general-size", type=int, default=DEFAULT_GENERAL_SIZE)
    args = ap.parse_args(argv)
    root = Path(args.root)
    lex = build(root, args.general_size)
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    raw = json.dumps(lex, separators=(",", ":"), sort_keys=True).encode("utf-8")
    # mtime=0: the same database gives the same bytes (reproducible asset).
    with open(out, "wb") as fh, gzip.GzipFile(filename="", mode="wb", fileobj=fh, mtime=0, compresslevel=9) as gz:
        gz.write(raw)
    (out.parent / "LICENSE-WordNet.txt").write_text(licence_text(root), encoding="utf-8")
    n_lemmas = sum(len(d) for d in lex["lemmas"].values())
    print(f"wrote {out}: {out.stat().st_size / 1e6:.2f} MB gzipped ({len(raw) / 1e6:.2f} MB JSON); "
          f"{len(lex['pos'])} synsets, {n_lemmas} lemma entries, {len(lex['antonyms'])} direct and "
          f"{len(lex['derived_antonyms'])} derived antonym pairs, {len(lex['general'])} general synsets")


if __name__ == "__main__":
    main()
