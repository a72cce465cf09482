-- Version 7 to 8: warmups and iterations are no longer part of a cell's key (a
-- cell's identity is its parameters, not how long it was measured). Before this script runs, the
-- store recomputes every cell's key and canonical text (rekey_cells in store.cpp), making cells
-- that differed only in those one cell with history. The columns stay as they were.
UPDATE schema_info SET version = 8;
PRAGMA user_version = 8;
