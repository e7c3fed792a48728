"""Where memory is kept: the one interface the Store persists through (`Persistence`), the state
dir on disk, the search index's file beside its snapshot, and PostgreSQL for a team. The Store
never asks which one it has."""
