"""Where texts come from: BEIR collections (local or downloaded) read with line-checked readers."""
