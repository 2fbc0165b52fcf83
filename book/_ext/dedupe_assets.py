"""Drop repeated script tags from every page.

With Jupyter Book 1.0.4, sphinx-thebe and sphinx-togglebutton add their inline configuration scripts twice per
page, and the second ``const THEBE_JS_URL = ...`` is a "has already been declared" error in the browser console.
This keeps the first of each script that writes the same tag (same file, inline body and attributes).
"""

from __future__ import annotations


def _dedupe_scripts(app, pagename, templatename, context, doctree) -> None:
    scripts = context.get("script_files")
    if not scripts:
        return
    seen, unique = set(), []
    for script in scripts:
        # the copies differ in priority and in an inline script's filename (None or ""), which the page never
        # shows, so compare what is written to the page
        attributes = getattr(script, "attributes", {})
        filename = getattr(script, "filename", str(script)) or ""
        key = (filename, tuple(sorted((k, str(v)) for k, v in attributes.items())))
        if key not in seen:
            seen.add(key)
            unique.append(script)
    context["script_files"] = unique


def setup(app):
    # run after the other extensions have added their scripts to the page
    app.connect("html-page-context", _dedupe_scripts, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
