/*
 * Signed entries and bundles (entry.h).  Lengths are checked before any
 * byte is read past the header; a signature is checked before any field
 * is believed.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sodium.h>

#include "entry.h"

static const char entry_magic[8] = { 'k', 's', 'p', 'e', 'c', 'E', '1', '\n' };
static const char bundle_magic[8] = { 'k', 's', 'p', 'e', 'c', 'B', '1', '\n' };

#define PUB_TAG "kspec-fleet-public-v1 "
#define SEC_TAG "kspec-fleet-secret-v1 "

_Static_assert(KS_FLEET_PK_BYTES == crypto_sign_PUBLICKEYBYTES, "pk size");
_Static_assert(KS_FLEET_SK_BYTES == crypto_sign_SECRETKEYBYTES, "sk size");
_Static_assert(KS_FLEET_SIG_BYTES == crypto_sign_BYTES, "sig size");

static void put_be(uint8_t *p, uint64_t v, int n)
{
	int i;

	for (i = n - 1; i >= 0; i--, v >>= 8)
		p[i] = (uint8_t)v;
}

static uint64_t get_be(const uint8_t *p, int n)
{
	uint64_t v = 0;
	int i;

	for (i = 0; i < n; i++)
		v = v << 8 | p[i];
	return v;
}

static void key_id(const uint8_t pk[KS_FLEET_PK_BYTES],
    uint8_t id[KS_FLEET_ID_BYTES])
{
	ks_hash_t h;

	ks_hash(pk, KS_FLEET_PK_BYTES, &h);
	memcpy(id, h.b, KS_FLEET_ID_BYTES);
}

void ks_fleet_id_hex(const uint8_t id[KS_FLEET_ID_BYTES], char out[17])
{
	sodium_bin2hex(out, 17, id, KS_FLEET_ID_BYTES);
}

/* Writes LINE to PATH, created with MODE, never over an existing file. */
static int write_new(const char *path, const char *line, mode_t mode,
    char *err, size_t errlen)
{
	size_t n = strlen(line);
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC |
	    O_NOFOLLOW, mode);

	if (fd < 0) {
		if (errno == EEXIST) {
			snprintf(err, errlen, "%s exists; not replacing a key "
			    "(remove it first, or give another prefix)", path);
			return KS_E_IO;
		}
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return ks_err_from_errno(errno);
	}
	if (fchmod(fd, mode) != 0 || write(fd, line, n) != (ssize_t)n ||
	    fsync(fd) != 0) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		close(fd);
		unlink(path);
		return KS_E_IO;
	}
	close(fd);
	return KS_OK;
}

int ks_fleet_keygen(const char *prefix, char *id_hex, char *err,
    size_t errlen)
{
	uint8_t pk[KS_FLEET_PK_BYTES], sk[KS_FLEET_SK_BYTES];
	uint8_t id[KS_FLEET_ID_BYTES];
	char hex[2 * KS_FLEET_SK_BYTES + 1], line[256], pub[4200], sec[4200];
	int rc;

	if ((size_t)snprintf(pub, sizeof pub, "%s.public", prefix) >=
	    sizeof pub || (size_t)snprintf(sec, sizeof sec, "%s.secret",
	    prefix) >= sizeof sec) {
		snprintf(err, errlen, "key path too long");
		return KS_E_TOO_LARGE;
	}
	crypto_sign_keypair(pk, sk);
	key_id(pk, id);
	ks_fleet_id_hex(id, id_hex);
	sodium_bin2hex(hex, sizeof hex, sk, sizeof sk);
	snprintf(line, sizeof line, SEC_TAG "%s\n", hex);
	rc = write_new(sec, line, 0600, err, errlen);
	sodium_memzero(sk, sizeof sk);
	sodium_memzero(line, sizeof line);
	sodium_memzero(hex, sizeof hex);
	if (rc)
		return rc;
	sodium_bin2hex(hex, sizeof hex, pk, sizeof pk);
	snprintf(line, sizeof line, PUB_TAG "%s\n", hex);
	rc = write_new(pub, line, 0644, err, errlen);
	if (rc)
		unlink(sec);
	return rc;
}

/* The one line of a key file at PATH (FD open) after TAG, as N bytes. */
static int read_key(int fd, const char *path, const char *tag, uint8_t *out,
    size_t n, char *err, size_t errlen)
{
	char buf[300];
	size_t bin = 0, tl = strlen(tag);
	const char *end = NULL;
	ssize_t got = read(fd, buf, sizeof buf - 1);

	if (got < 0) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return KS_E_IO;
	}
	buf[got] = '\0';
	if ((size_t)got < tl || memcmp(buf, tag, tl) != 0 ||
	    sodium_hex2bin(out, n, buf + tl, (size_t)got - tl, NULL, &bin,
	    &end) != 0 || bin != n || (*end && strcmp(end, "\n") != 0)) {
		sodium_memzero(buf, sizeof buf);
		snprintf(err, errlen, "%s is not a kspec fleet %s key file "
		    "(one line: %s<hex>)", path, tag[12] == 'p' ? "public" :
		    "secret", tag);
		return KS_E_INVAL;
	}
	sodium_memzero(buf, sizeof buf);
	return KS_OK;
}

int ks_fleet_load_public(const char *path, ks_fleet_pub_t *out, char *err,
    size_t errlen)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC), rc;

	if (fd < 0) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return ks_err_from_errno(errno);
	}
	rc = read_key(fd, path, PUB_TAG, out->pk, sizeof out->pk, err, errlen);
	close(fd);
	if (rc == KS_OK)
		key_id(out->pk, out->id);
	return rc;
}

int ks_secret_open(const char *path, int *fdp, char *err, size_t errlen)
{
	struct stat st;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);

	*fdp = -1;
	if (fd < 0) {
		snprintf(err, errlen, "%s: %s", path, errno == ELOOP ?
		    "a symbolic link; give the file itself" :
		    strerror(errno));
		return errno == ELOOP ? KS_E_DENIED : ks_err_from_errno(errno);
	}
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
	    (st.st_uid != geteuid() && st.st_uid != 0) ||
	    (st.st_mode & 077)) {
		snprintf(err, errlen, "%s: a secret (key or password) must be "
		    "a file of its user that nobody else can read or write "
		    "(owned by uid %ld, mode %04o; chmod 0600)", path,
		    (long)st.st_uid, (unsigned)(st.st_mode & 07777));
		close(fd);
		return KS_E_DENIED;
	}
	*fdp = fd;
	return KS_OK;
}

int ks_fleet_load_secret(const char *path, ks_fleet_sec_t *out, char *err,
    size_t errlen)
{
	int fd, rc = ks_secret_open(path, &fd, err, errlen);

	if (rc)
		return rc;
	rc = read_key(fd, path, SEC_TAG, out->sk, sizeof out->sk, err, errlen);
	close(fd);
	if (rc == KS_OK)
		key_id(out->sk + 32, out->id);   /* the public half */
	return rc;
}

int ks_entry_seal(const ks_fleet_sec_t *sk, const ks_hash_t *key,
    const char *meta, size_t meta_len, const void *bytes, size_t len,
    ks_buf_t *out)
{
	uint8_t head[KS_ENTRY_HEAD], *start;
	size_t at = out->len;

	if (meta_len > KS_ENTRY_MAX_META)
		return KS_E_TOO_LARGE;
	memcpy(head, entry_magic, 8);
	memcpy(head + 8, sk->id, KS_FLEET_ID_BYTES);
	memcpy(head + 8 + KS_FLEET_ID_BYTES, key->b, KS_HASH_BYTES);
	put_be(head + 8 + KS_FLEET_ID_BYTES + KS_HASH_BYTES, meta_len, 4);
	put_be(head + 12 + KS_FLEET_ID_BYTES + KS_HASH_BYTES, len, 8);
	if (ks_buf_reserve(out, sizeof head + meta_len + len +
	    KS_FLEET_SIG_BYTES) != KS_OK)
		return KS_E_NOMEM;
	ks_buf_append(out, head, sizeof head);
	ks_buf_append(out, meta, meta_len);
	ks_buf_append(out, bytes, len);
	start = (uint8_t *)out->data + at;
	crypto_sign_detached((uint8_t *)out->data + out->len, NULL, start,
	    out->len - at, sk->sk);
	out->len += KS_FLEET_SIG_BYTES;
	return KS_OK;
}

int ks_entry_open(const ks_fleet_pub_t *keys, int nkeys, const void *v,
    size_t len, ks_entry_t *out, char *err, size_t errlen)
{
	const uint8_t *p = v;
	uint64_t ml, bl;
	char id[17];
	int i;

	if (len < KS_ENTRY_HEAD + KS_FLEET_SIG_BYTES ||
	    memcmp(p, entry_magic, 8) != 0) {
		snprintf(err, errlen, "not a kspec signed entry");
		return KS_E_PROTO;
	}
	ml = get_be(p + 8 + KS_FLEET_ID_BYTES + KS_HASH_BYTES, 4);
	bl = get_be(p + 12 + KS_FLEET_ID_BYTES + KS_HASH_BYTES, 8);
	if (ml > KS_ENTRY_MAX_META || bl > len ||
	    KS_ENTRY_HEAD + ml + bl + KS_FLEET_SIG_BYTES != len) {
		snprintf(err, errlen, "signed entry: its lengths (meta %llu, "
		    "bytes %llu) do not add up to its %zu bytes",
		    (unsigned long long)ml, (unsigned long long)bl, len);
		return KS_E_PROTO;
	}
	for (i = 0; i < nkeys; i++)
		if (memcmp(keys[i].id, p + 8, KS_FLEET_ID_BYTES) == 0)
			break;
	if (i == nkeys) {
		ks_fleet_id_hex(p + 8, id);
		snprintf(err, errlen, "signed by key %s, which is not one of "
		    "this daemon's fleet keys", id);
		return KS_E_DENIED;
	}
	if (crypto_sign_verify_detached(p + len - KS_FLEET_SIG_BYTES, p,
	    len - KS_FLEET_SIG_BYTES, keys[i].pk) != 0) {
		snprintf(err, errlen, "its signature does not verify: the "
		    "entry was changed after it was signed");
		return KS_E_DENIED;
	}
	memcpy(out->key.b, p + 8 + KS_FLEET_ID_BYTES, KS_HASH_BYTES);
	out->meta = (const char *)p + KS_ENTRY_HEAD;
	out->meta_len = (size_t)ml;
	out->bytes = p + KS_ENTRY_HEAD + ml;
	out->len = (size_t)bl;
	out->signer = i;
	return KS_OK;
}

int ks_bundle_begin(ks_buf_t *out, uint32_t count)
{
	uint8_t n[4];

	put_be(n, count, 4);
	if (ks_buf_append(out, bundle_magic, 8) != KS_OK ||
	    ks_buf_append(out, n, 4) != KS_OK)
		return KS_E_NOMEM;
	return KS_OK;
}

int ks_bundle_add(ks_buf_t *out, const ks_buf_t *entry)
{
	uint8_t n[8];

	put_be(n, entry->len, 8);
	if (ks_buf_append(out, n, 8) != KS_OK ||
	    ks_buf_append(out, entry->data, entry->len) != KS_OK)
		return KS_E_NOMEM;
	return KS_OK;
}

/* Reads N bytes at OFF: KS_E_PROTO when the file ends first. */
static int read_at(int fd, void *buf, size_t n, uint64_t off, char *err,
    size_t errlen)
{
	size_t got = 0;
	ssize_t r;

	while (got < n) {
		r = pread(fd, (uint8_t *)buf + got, n - got,
		    (off_t)(off + got));
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			snprintf(err, errlen, "cannot read the bundle: %s",
			    strerror(errno));
			return KS_E_IO;
		}
		if (r == 0) {
			snprintf(err, errlen, "the bundle ends before its "
			    "length says (it changed while it was read?)");
			return KS_E_PROTO;
		}
		got += (size_t)r;
	}
	return KS_OK;
}

/* The length of the entry whose length field is at F->at, checked
 * against what the file has after it. */
static int entry_len(const ks_bundle_file_t *f, uint64_t *len, char *err,
    size_t errlen)
{
	uint8_t b[8];
	int rc = f->size - f->at < 8 ? KS_E_PROTO : read_at(f->fd, b, 8,
	    f->at, err, errlen);

	if (rc == KS_OK && (*len = get_be(b, 8)) > f->size - f->at - 8)
		rc = KS_E_PROTO;
	if (rc == KS_E_PROTO)
		snprintf(err, errlen, "the bundle is cut short at entry %u of "
		    "%u", f->next, f->count);
	return rc;
}

int ks_bundle_file_open(ks_bundle_file_t *f, int fd, uint64_t size,
    char *err, size_t errlen)
{
	uint8_t head[12];
	uint64_t len;
	int rc;

	memset(f, 0, sizeof *f);
	f->fd = fd;
	f->size = size;
	rc = size < sizeof head ? KS_E_PROTO : read_at(fd, head, sizeof head,
	    0, err, errlen);
	if (rc == KS_OK && memcmp(head, bundle_magic, 8) != 0)
		rc = KS_E_PROTO;
	if (rc == KS_E_PROTO)
		snprintf(err, errlen, "not a kspec bundle");
	if (rc)
		return rc;
	f->count = (uint32_t)get_be(head + 8, 4);
	/* The walk: every length, none of the entries. */
	for (f->at = sizeof head; f->next < f->count; f->next++) {
		rc = entry_len(f, &len, err, errlen);
		if (rc)
			return rc;
		f->at += 8 + len;
	}
	if (f->at != size) {
		snprintf(err, errlen, "%llu bytes after the bundle's last "
		    "entry", (unsigned long long)(size - f->at));
		return KS_E_PROTO;
	}
	f->at = sizeof head;
	f->next = 0;
	return KS_OK;
}

int ks_bundle_file_peek(ks_bundle_file_t *f, uint64_t *len, char *err,
    size_t errlen)
{
	return entry_len(f, len, err, errlen);
}

int ks_bundle_file_take(ks_bundle_file_t *f, void *buf, uint64_t len,
    char *err, size_t errlen)
{
	int rc = buf ? read_at(f->fd, buf, (size_t)len, f->at + 8, err,
	    errlen) : KS_OK;

	if (rc == KS_OK) {
		f->at += 8 + len;
		f->next++;
	}
	return rc;
}
