/* Force-included (-include) before each QuickJS C file: include the libc headers with __wasi__
 * defined, then undefine it so that quickjs.c's `#if defined(__wasi__)` in update_stack_limit
 * (which disables the stack check) is not taken. __GLIBC__ keeps cutils.h's
 * malloc_usable_size() branch (it tests __linux__ || ... || __GLIBC__ || __wasi__). */
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <stdint.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <fenv.h>
#include <time.h>
#include <sys/time.h>
#include <alloca.h>
#include <malloc.h>
#include <unistd.h>
#undef __wasi__
#define __GLIBC__ 2
