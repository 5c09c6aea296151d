# make install: the header, the libraries and a pkg-config file.
#
#   make install [PREFIX=/usr/local] [DESTDIR=] [LIBDIR=$(PREFIX)/lib]
#   make uninstall
#   make test-install   installs into a scratch DESTDIR, builds a program
#                       with `pkg-config --cflags --libs scralloc` and runs it
#
# What goes where (release build):
#   include/scralloc.h
#   lib/libscralloc-api.so(.0)  the scr_* API only: a program linking it keeps
#                               the C library's malloc (what scralloc.pc names)
#   lib/libscralloc.a           the same API, static
#   lib/libscralloc.so          the drop-in: also defines malloc, free & co.,
#                               for LD_PRELOAD (linking it replaces malloc too,
#                               as linking libjemalloc.so or libmimalloc.so does)
#   lib/pkgconfig/scralloc.pc
# docs/c.md says which one to use when.

PREFIX     ?= /usr/local
INCLUDEDIR ?= $(PREFIX)/include
LIBDIR     ?= $(PREFIX)/lib
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
SCR_VERSION := $(shell sed -n 's/^\#define SCR_VERSION "\(.*\)"/\1/p' core/include/scralloc.h)
API_SONAME  := libscralloc-api.so.0

TEST_STEPS += test-install
.PHONY: install uninstall test-install

# The API library: the flavour's objects without SCR_OVERRIDE (static.o,
# as in libscralloc.a), so malloc is not among its symbols.
define apiflavour
$(B)/$(1)/libscralloc-api.so: $(B)/$(1)/static.o
	$$(CC) $(2) -shared $(SO_LDFLAGS) -Wl,-soname,$(API_SONAME) -o $$@ $$^ -ldl
endef
$(eval $(call apiflavour,release,$(REL_FLAGS)))
$(eval $(call apiflavour,debug,$(DBG_FLAGS)))
lib: $(B)/release/libscralloc-api.so $(B)/debug/libscralloc-api.so

# The .pc file names the installed directories, so install writes it.
install: $(B)/release/libscralloc-api.so $(B)/release/libscralloc.a $(B)/release/libscralloc.so
	install -d '$(DESTDIR)$(INCLUDEDIR)' '$(DESTDIR)$(LIBDIR)' '$(DESTDIR)$(PKGCONFIGDIR)'
	install -m 644 core/include/scralloc.h '$(DESTDIR)$(INCLUDEDIR)/'
	install -m 644 $(B)/release/libscralloc.a '$(DESTDIR)$(LIBDIR)/'
	install -m 755 $(B)/release/libscralloc-api.so '$(DESTDIR)$(LIBDIR)/$(API_SONAME)'
	ln -sf $(API_SONAME) '$(DESTDIR)$(LIBDIR)/libscralloc-api.so'
	install -m 755 $(B)/release/libscralloc.so '$(DESTDIR)$(LIBDIR)/'
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|' \
	    -e 's|@LIBDIR@|$(LIBDIR)|' -e 's|@VERSION@|$(SCR_VERSION)|' \
	    mk/scralloc.pc.in > '$(DESTDIR)$(PKGCONFIGDIR)/scralloc.pc'

uninstall:
	rm -f '$(DESTDIR)$(INCLUDEDIR)/scralloc.h' '$(DESTDIR)$(LIBDIR)/libscralloc.a' \
	  '$(DESTDIR)$(LIBDIR)/$(API_SONAME)' '$(DESTDIR)$(LIBDIR)/libscralloc-api.so' \
	  '$(DESTDIR)$(LIBDIR)/libscralloc.so' '$(DESTDIR)$(PKGCONFIGDIR)/scralloc.pc'

test-install: $(B)/release/libscralloc-api.so $(B)/release/libscralloc.a $(B)/release/libscralloc.so
	@echo "== install: make install into a scratch DESTDIR, a program built with pkg-config"
	tests/install/test_install.sh
