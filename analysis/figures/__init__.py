"""The report's figures: each module draws one from the results database (render) or says why
the database has no data for it (Skip)."""
