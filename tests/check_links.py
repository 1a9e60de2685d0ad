#!/usr/bin/env python3
"""Checks that every relative link in README.md and docs/**/*.md resolves inside the repository.

Usage: check_links.py SOURCE_ROOT. Python 3's standard library only.

Every Markdown link and image (`[text](target)`, `![alt](target)`, `[id]: target`, and HTML
`href=`/`src=`) outside code (fenced blocks, indented blocks, `code spans`) is checked:
- a relative target must name a file or folder inside SOURCE_ROOT (relative to the linking
  file's folder; a leading "/" means the repository's root);
- its `#anchor`, where the target is a Markdown file (or the linking file itself, for
  `#anchor` alone), must be a heading of that file under GitHub's rules: lowercase, markup
  and punctuation dropped (letters, digits, "_" and "-" kept), each space a "-", and "-1",
  "-2", ... added to repeated headings; or an explicit `<a name=...>`/`id=...`.
Absolute links (http:, https:, mailto:, any scheme) are not fetched: CI has no network.

Exit status 0 when every link resolves; 1, with one line per broken link,
`file:line: link (why)`, when one does not; 2 on a usage error.
"""

import os
import re
import sys
import urllib.parse

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
ATX_HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
SETEXT_UNDERLINE = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
REFERENCE_DEFINITION = re.compile(r"^ {0,3}\[([^\]]+)\]:[ \t]*(<[^>]*>|\S+)")
HTML_ATTRIBUTE = re.compile(r"""<(?:a|img|source)\b[^>]*?\b(?:href|src)\s*=\s*["']([^"']*)["']""",
                            re.I)
HTML_ANCHOR = re.compile(r"""<[a-z]+\b[^>]*?\b(?:name|id)\s*=\s*["']([^"']*)["']""", re.I)
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def strip_code_spans(line):
    """The line with every `code span` replaced by spaces (columns kept)."""
    out = []
    i = 0
    while i < len(line):
        if line[i] == "\\" and i + 1 < len(line):
            out.append(line[i:i + 2])
            i += 2
            continue
        if line[i] == "`":
            run = len(line[i:]) - len(line[i:].lstrip("`"))
            ticks = line[i:i + run]
            end = line.find(ticks, i + run)
            while end != -1 and end + run < len(line) and line[end + run] == "`":
                end = line.find(ticks, end + run + 1)
            if end == -1:  # an unmatched backtick run is literal text
                out.append(ticks)
                i += run
                continue
            out.append(" " * (end + run - i))
            i = end + run
            continue
        out.append(line[i])
        i += 1
    return "".join(out)


def prose_lines(text):
    """(line number, line) for every line outside fenced and indented code blocks."""
    fence = None
    previous_blank = True
    in_indented = False
    for number, line in enumerate(text.split("\n"), start=1):
        if fence is not None:
            if re.match(r"^ {0,3}" + re.escape(fence[0]) + "{" + str(len(fence)) + r",}[ \t]*$",
                        line):
                fence = None
            previous_blank = False
            continue
        match = FENCE.match(line)
        if match:
            fence = match.group(1)
            continue
        blank = not line.strip()
        indented = line.startswith("    ") or line.startswith("\t")
        if indented and (previous_blank or in_indented) and not blank:
            in_indented = True
            continue
        if not blank:
            in_indented = False
        previous_blank = blank
        yield number, line


def slug(heading):
    """GitHub's anchor for a heading's text (without the -N of repeated headings)."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links and images: their text
    text = re.sub(r"<[^>]+>", "", text)                          # inline HTML
    text = text.strip().lower()
    text = "".join(c for c in text if c.isalnum() or c in "_- ")
    return text.replace(" ", "-")


def anchors_of(path, cache={}):
    """Every anchor a Markdown file defines: its headings' slugs and explicit names/ids."""
    if path in cache:
        return cache[path]
    with open(path, encoding="utf-8") as f:
        text = f.read()
    found = set()
    seen = {}

    def add_heading(heading):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")

    previous = None
    for _, line in prose_lines(text):
        match = ATX_HEADING.match(line)
        if match:
            add_heading(match.group(2) or "")
            previous = None
            continue
        if previous is not None and previous.strip() and SETEXT_UNDERLINE.match(line) \
                and not ATX_HEADING.match(previous):
            # "Text\n---" is a heading; a lone "---" after a blank line is a rule.
            add_heading(previous.strip())
            previous = None
            continue
        for name in HTML_ANCHOR.findall(line):
            found.add(name)
        previous = line
    cache[path] = found
    return found


def link_targets(line):
    """The targets of the inline links, images and reference definitions on a line."""
    targets = []
    match = REFERENCE_DEFINITION.match(line)
    if match:
        targets.append(match.group(2))
    i = 0
    while True:
        i = line.find("](", i)
        if i == -1:
            break
        # The target runs to the ")" that balances the "(", or is written <...>.
        j = i + 2
        while j < len(line) and line[j] in " \t":
            j += 1
        if j < len(line) and line[j] == "<":
            end = line.find(">", j)
            if end == -1:
                i += 2
                continue
            targets.append(line[j:end + 1])
            i = end
            continue
        depth = 0
        k = j
        while k < len(line):
            c = line[k]
            if c == "\\":
                k += 2
                continue
            if c == "(":
                depth += 1
            elif c == ")":
                if depth == 0:
                    break
                depth -= 1
            elif c in " \t" and depth == 0:
                break  # a title follows
            k += 1
        targets.append(line[j:k])
        i = k
    targets.extend(HTML_ATTRIBUTE.findall(line))
    return targets


def check_target(root, source, target):
    """None if the link resolves, else why not."""
    target = target.strip()
    if target.startswith("<") and target.endswith(">"):
        target = target[1:-1]
    if not target:
        return "empty link"
    if SCHEME.match(target) or target.startswith("//"):
        return None  # absolute: not fetched
    path_part, _, anchor = target.partition("#")
    path_part = urllib.parse.unquote(path_part.split("?", 1)[0])
    anchor = urllib.parse.unquote(anchor)
    if path_part:
        if path_part.startswith("/"):
            resolved = os.path.normpath(os.path.join(root, path_part.lstrip("/")))
        else:
            resolved = os.path.normpath(os.path.join(os.path.dirname(source), path_part))
        if os.path.commonpath([root, resolved]) != root:
            return "outside the repository"
        if not os.path.exists(resolved):
            return "no such file"
    else:
        resolved = source
    if anchor and resolved.endswith(".md") and os.path.isfile(resolved):
        if anchor not in anchors_of(resolved):
            return f"no heading #{anchor} in {os.path.relpath(resolved, root)}"
    return None


def markdown_files(root):
    files = []
    readme = os.path.join(root, "README.md")
    if os.path.isfile(readme):
        files.append(readme)
    for folder, dirs, names in os.walk(os.path.join(root, "docs")):
        dirs.sort()
        files.extend(os.path.join(folder, n) for n in sorted(names) if n.endswith(".md"))
    return files


def main(argv):
    if len(argv) != 2:
        print("usage: check_links.py SOURCE_ROOT", file=sys.stderr)
        return 2
    root = os.path.realpath(argv[1])
    files = markdown_files(root)
    if not files:
        print(f"check_links.py: no README.md or docs/*.md under {root}", file=sys.stderr)
        return 2
    broken = 0
    links = 0
    for path in files:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for number, line in prose_lines(text):
            for target in link_targets(strip_code_spans(line)):
                links += 1
                why = check_target(root, path, target)
                if why:
                    broken += 1
                    print(f"{os.path.relpath(path, root)}:{number}: {target} ({why})")
    if broken:
        sys.stdout.flush()
        print(f"check_links.py: {broken} broken of {links} links in {len(files)} files",
              file=sys.stderr)
        return 1
    print(f"check_links.py: {links} links in {len(files)} files, all resolve")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
