"""The jinja2 template of the HTML benchmark report (autoescaped: every string from a config, kernel name or
compiler log is text, never markup)."""
