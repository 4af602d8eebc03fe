"""YAML configs users copy and edit (shipped inside the xegemm package)."""
