"""A small word-count pipeline: files in, files out, one external input, dynamic dependencies.

Run it from the repository root::

    conveyor run examples.wordcount.Report --workdir out

``Corpus`` is the external input (a text file shipped in ``data/``). ``CountWords`` counts the
words of the corpus. ``Report`` reads the counts, then *yields* one ``LetterReport`` per first
letter it finds — dependencies it can only know at run time — and writes an index of them.
"""

from __future__ import annotations

import json
from pathlib import Path

import conveyor

DATA = Path(__file__).parent / "data" / "corpus.txt"


class Corpus(conveyor.ExternalTask):
    """The input text, made elsewhere."""

    path = conveyor.Parameter(default=str(DATA))

    def output(self) -> conveyor.LocalTarget:
        return conveyor.LocalTarget(self.path)


class CountWords(conveyor.Task):
    """Count every word of the corpus into counts.json."""

    workdir = conveyor.PathParameter()

    def requires(self) -> Corpus:
        return Corpus()

    def output(self) -> conveyor.LocalTarget:
        return conveyor.LocalTarget(self.workdir / "counts.json")

    def run(self) -> None:
        counts: dict[str, int] = {}
        with self.input().open("r") as src:
            for line in src:
                for word in line.lower().split():
                    word = word.strip(".,;:!?\"'()")
                    if word:
                        counts[word] = counts.get(word, 0) + 1
        self.set_status_message(f"{len(counts)} distinct words")
        with self.output().open("w") as out:
            json.dump(counts, out, indent=1, sort_keys=True)


class LetterReport(conveyor.Task):
    """The words starting with one letter, most frequent first."""

    workdir = conveyor.PathParameter()
    letter = conveyor.Parameter()

    def requires(self) -> CountWords:
        return CountWords(workdir=self.workdir)

    def output(self) -> conveyor.LocalTarget:
        return conveyor.LocalTarget(self.workdir / "letters" / f"{self.letter}.txt")

    def run(self) -> None:
        with self.input().open("r") as src:
            counts = json.load(src)
        words = sorted(
            ((n, w) for w, n in counts.items() if w.startswith(self.letter)), reverse=True
        )
        with self.output().open("w") as out:
            out.writelines(f"{n:5d} {w}\n" for n, w in words)


class Report(conveyor.Task):
    """An index of the per-letter reports; which letters exist is known only at run time."""

    workdir = conveyor.PathParameter(default=Path("out"))

    def requires(self) -> CountWords:
        return CountWords(workdir=self.workdir)

    def output(self) -> conveyor.LocalTarget:
        return conveyor.LocalTarget(self.workdir / "report.txt")

    def run(self):  # type: ignore[no-untyped-def]
        with self.input().open("r") as src:
            letters = sorted({word[0] for word in json.load(src) if word[0].isalpha()})
        reports = yield [LetterReport(workdir=self.workdir, letter=c) for c in letters]
        with self.output().open("w") as out:
            for letter, target in zip(letters, reports, strict=True):
                lines = Path(target.path).read_text().count("\n")
                out.write(f"{letter}: {lines} words in {target.path}\n")
