/* Sampled allocation sites: the countdown, the stacks, the live samples
 * (scr_profile_samples; docs/profile.md). */
#include "internal.h"
