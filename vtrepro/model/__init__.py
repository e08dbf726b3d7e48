"""Models: finding and checking a model folder, the SPLADE encoder over a masked LM, the IDF query encoder."""
