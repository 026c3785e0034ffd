"""What the scripts that generate a Markdown table of the docs from a C++ table share (option_table.py,
passes_table.py): splitting C++ argument lists, and writing or checking the table between its marker lines."""
import difflib
import re
import sys

STRING = r'"(?:[^"\\]|\\.)*"'


def split_top_level(text, opening="([{", closing=")]}"):
    """The comma-separated items of `text` (the inside of a call or braced list), split at commas outside
    brackets and string literals; an empty last item is dropped."""
    items, depth, current, index = [], 0, "", 0
    while index < len(text):
        char = text[index]
        if char == '"':
            end = re.compile(STRING).match(text, index).end()
            current += text[index:end]
            index = end
            continue
        if char in opening:
            depth += 1
        elif char in closing:
            depth -= 1
        elif char == "," and depth == 0:
            items.append(current.strip())
            current = ""
            index += 1
            continue
        current += char
        index += 1
    if current.strip():
        items.append(current.strip())
    return items


def split_doc(text, path, begin_marker, end_marker, what):
    """(before, table, after) of a document's text, the table being the lines from `begin_marker` to
    `end_marker`."""
    begin, end = text.find(begin_marker), text.find(end_marker)
    if begin < 0 or end < begin:
        raise ValueError(f"{path} has no {what} between the lines\n{begin_marker}\n{end_marker}")
    end += len(end_marker) + 1
    return text[:begin], text[begin:end], text[end:]


def print_update_or_check(table, doc, source, script, what, begin_marker, end_marker, update, check):
    """Prints the table; or (`update`) writes it into `doc` between its markers; or (`check`) returns 1 with
    the difference when `doc` holds another table. Returns the exit code."""
    if not (update or check):
        sys.stdout.write(table)
        return 0
    with open(doc) as file:
        before, current, after = split_doc(file.read(), doc, begin_marker, end_marker, what)
    if update:
        with open(doc, "w") as file:
            file.write(before + table + after)
        print(f"{script}: wrote the {what} of {doc}")
        return 0
    if current != table:
        sys.stdout.writelines(difflib.unified_diff(current.splitlines(True), table.splitlines(True),
                                                   doc + " (now)", "generated from " + source))
        print(f"{script}: {doc}'s {what} differs from {source}; regenerate it with "
              f"`python3 scripts/{script} --update`")
        return 1
    print(f"{script}: {doc}'s {what} matches {source} ({len(table.splitlines()) - 4} rows)")
    return 0
