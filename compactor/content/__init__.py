"""What an item's text is: its content type and automatic tags, the secrets redacted before it is
stored, tag parsing, and token counting."""
