//! Xen: datapath (phy, qdisk) per backend and format, and what Xen cannot do.
