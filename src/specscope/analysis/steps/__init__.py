"""Step reconstruction: verify steps from a stream's chunks, the server's own step records, and whether the server drafts at all."""
