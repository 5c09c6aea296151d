/* The profile's reports: symbols, folded stacks, pprof, blame, top sites
 * (scr_profile_symbol, scr_profile_write; docs/profile.md). */
#include "internal.h"
