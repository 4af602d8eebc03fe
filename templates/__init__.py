"""Jinja2 templates of the generated OpenCL C kernels (shipped inside the xegemm package)."""
