"""Small helpers the rest of the package leans on; nothing here is public."""
