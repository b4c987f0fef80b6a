"""File and network utilities every command shares: atomic writes, output folders, input readers, a chat client."""
