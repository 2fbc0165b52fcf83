"""Labels the reader matches across pages: citations and chapters.

Citations. Under sphinxcontrib-bibtex's ``author_year`` referencing, two papers by the same first author in the
same year (Zhang, Wu and Bartlett 2024; Zhang, Frei and Bartlett 2024) both read "Zhang et al. [2024]", and the
bibliography page's alpha labels ([ZWB24], [ZFB24]) match neither. This registers

* a pybtex label style, ``author_year_suffix``: each entry's label is its in-text author-year,
  "Zhang et al., 2024", with "a", "b", ... after the year where that text is shared, in the bibliography's order;
* a pybtex formatting style of the same name (``bibtex_default_style``): alpha's entries and sorting with those
  labels;
* a referencing style of the same name (``bibtex_reference_style``): ``author_year`` whose year is the label's
  year and letter, so that the text "Zhang et al. [2024a]" and the bibliography's "[Zhang et al., 2024a]" agree.

Chapters. myst-nb's execution table (``nb-exec-table``) names each notebook by its file, "notebooks/00_icl_setting";
the book numbers its chapters from 1. A post-transform writes the chapter's number and title instead, as the
table of contents numbers them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from types import SimpleNamespace

import pybtex.plugin
from docutils import nodes
from pybtex.richtext import Text
from pybtex.style.formatting.alpha import Style as AlphaStyle
from pybtex.style.labels import BaseLabelStyle
from sphinx.addnodes import pending_xref
from sphinx.transforms.post_transforms import SphinxPostTransform
from sphinxcontrib.bibtex.plugin import register_plugin
from sphinxcontrib.bibtex.style.referencing import PersonStyle
from sphinxcontrib.bibtex.style.referencing.author_year import AuthorYearReferenceStyle
from sphinxcontrib.bibtex.style.referencing.basic_author_year import (
    BasicAuthorYearParentheticalReferenceStyle,
    BasicAuthorYearTextualReferenceStyle,
)
from sphinxcontrib.bibtex.style.referencing.extra_year import ExtraYearReferenceStyle
from sphinxcontrib.bibtex.style.template import join, join2, node, post_text, pre_text, reference
from sphinxcontrib.bibtex.style.template import year as plain_year

NAME = "author_year_suffix"


def author_year(entry, person: PersonStyle | None = None) -> tuple[str, str]:
    """The in-text author and year of a pybtex entry, as the ``author_year`` referencing style writes them
    ("Zhang et al.", "2024"); ``person`` is that style's person style (its default when None)."""
    person = person or PersonStyle()
    data = {"entry": entry, "style": SimpleNamespace(person=person)}
    authors = person.author_or_editor_or_title(full=False).format_data(data).render_as("text")
    return authors, entry.fields.get("year", "n.d.")


def suffixes(keys: list[tuple[str, str]]) -> list[str]:
    """For author-year pairs in the bibliography's order: "" for a pair that occurs once, "a", "b", ... in order
    for one that repeats."""
    counts: dict[tuple[str, str], int] = {}
    for key in keys:
        counts[key] = counts.get(key, 0) + 1
    seen: dict[tuple[str, str], int] = {}
    out = []
    for key in keys:
        if counts[key] == 1:
            out.append("")
            continue
        i = seen.get(key, 0)
        seen[key] = i + 1
        if i >= 26:
            raise ValueError(f"keys: more than 26 entries share the author-year {key}")
        out.append(chr(ord("a") + i))
    return out


class AuthorYearLabelStyle(BaseLabelStyle):
    """Labels "Author et al., 2024a": the in-text author-year, with a letter where two entries share it."""

    def format_labels(self, sorted_entries):
        entries = list(sorted_entries)
        keys = [author_year(entry) for entry in entries]
        for (authors, year), letter in zip(keys, suffixes(keys), strict=True):
            yield f"{authors}, {year}{letter}"


class AuthorYearSuffixStyle(AlphaStyle):
    """Alpha's entries and sorting (authors, year, title), with author-year labels."""

    default_label_style = NAME


_LABEL_YEAR = re.compile(r"(\d{4}|n\.d\.)([a-z]?)$")


@node
def year(children, data) -> Text:
    """The entry's year and, where its label gives one, the letter that tells it from another entry of the same
    author-year; the plain year under any other label style."""
    assert not children
    label = data["formatted_entry"].label
    plain = plain_year.format_data(data)
    match = _LABEL_YEAR.search(label)
    if match and match.group(1) == str(plain) and match.group(2):
        return Text(str(plain) + match.group(2))
    return plain


@dataclass
class _Parenthetical(BasicAuthorYearParentheticalReferenceStyle):
    def inner(self, role_name):
        authors = self.person.author_or_editor_or_title(full="s" in role_name)
        return join2(sep1=self.pre_text_sep, sep2=self.post_text_sep)[
            pre_text, reference[join(sep=self.author_year_sep)[authors, year]], post_text
        ]


@dataclass
class _Textual(BasicAuthorYearTextualReferenceStyle):
    def inner(self, role_name):
        return join(sep=self.text_reference_sep)[
            self.person.author_or_editor_or_title(full="s" in role_name),
            join[
                self.bracket.left,
                join2(sep1=self.pre_text_sep, sep2=self.post_text_sep)[pre_text, reference[year], post_text],
                self.bracket.right,
            ],
        ]


@dataclass
class _Year(ExtraYearReferenceStyle):
    def inner(self, role_name):
        return reference[year]


_REPLACED = {
    BasicAuthorYearParentheticalReferenceStyle: _Parenthetical,
    BasicAuthorYearTextualReferenceStyle: _Textual,
    ExtraYearReferenceStyle: _Year,
}


@dataclass
class AuthorYearSuffixReferenceStyle(AuthorYearReferenceStyle):
    """``author_year``, with the year's letter (2024a) wherever the year is written."""

    def __post_init__(self):
        super().__post_init__()
        # the parent builds its parts from its fields; rebuild the three that write the year, with the same fields
        self.styles = [
            _REPLACED[type(s)](**{k: v for k, v in vars(s).items() if k in type(s).__dataclass_fields__})
            if type(s) in _REPLACED
            else s
            for s in self.styles
        ]
        self.role_style = {}
        for style in self.styles:
            self.role_style.update((name, style) for name in style.role_names())


class ChapterNumbers(SphinxPostTransform):
    """In myst-nb's execution table, "notebooks/00_icl_setting" becomes "Chapter 1: <its title>"; pages that the
    table of contents does not number keep their title alone."""

    default_priority = 8.5  # after myst-nb builds the table (8), before references are resolved (9, 10)

    def run(self, **kwargs) -> None:
        env = self.env
        for table in self.document.findall(nodes.table):
            for ref in table.findall(pending_xref):
                if ref.get("reftype") != "doc":
                    continue
                text = ref.astext()
                if text not in env.titles:
                    continue
                title = env.titles[text].astext()
                number = env.toc_secnumbers.get(text, {}).get("")
                label = f"Chapter {number[0]}: {title}" if number else title
                ref.children = [nodes.inline(text=label)]


def setup(app):
    pybtex.plugin.register_plugin("pybtex.style.labels", NAME, AuthorYearLabelStyle)
    pybtex.plugin.register_plugin("pybtex.style.formatting", NAME, AuthorYearSuffixStyle)
    register_plugin("sphinxcontrib.bibtex.style.referencing", NAME, AuthorYearSuffixReferenceStyle)
    app.add_post_transform(ChapterNumbers)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
