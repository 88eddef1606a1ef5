"""The engine's core: sessions and their children. Private: nothing here is promised;
the public names are re-exported from `subsessions`."""
