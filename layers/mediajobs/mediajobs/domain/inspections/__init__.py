"""Pure inspections of bytes: walkers of JPEG markers and ISO-BMFF boxes (HEIF items,
MP4 containers). They read files but import no SDK and no codec."""
