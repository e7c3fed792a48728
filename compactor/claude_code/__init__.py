"""Claude Code's side of memory: its hooks (restore context at session start, save a digest
before it compacts and when it ends), reading its transcripts for that digest, and its
MEMORY.md files, both ways."""
