/*
 * Signed entries and bundles (proto/entry.h): what a reader accepts is
 * exactly what the holder of the secret key sealed.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../proto/entry.h"

static char dir[64], prefix[128], pubp[160], secp[160];
static ks_fleet_pub_t pub;
static ks_fleet_sec_t sec;

static void setup(void)
{
	char id[17], err[512];

	cr_assert_eq(ks_base_init(), KS_OK);
	snprintf(dir, sizeof dir, "/tmp/kspec-entry-XXXXXX");
	cr_assert(mkdtemp(dir));
	snprintf(prefix, sizeof prefix, "%s/fleet", dir);
	snprintf(pubp, sizeof pubp, "%s.public", prefix);
	snprintf(secp, sizeof secp, "%s.secret", prefix);
	cr_assert_eq(ks_fleet_keygen(prefix, id, err, sizeof err), KS_OK,
	    "%s", err);
	cr_assert_eq(ks_fleet_load_public(pubp, &pub, err, sizeof err), KS_OK,
	    "%s", err);
	cr_assert_eq(ks_fleet_load_secret(secp, &sec, err, sizeof err), KS_OK,
	    "%s", err);
}

static void down(void)
{
	char cmd[128];

	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", dir);
}

TestSuite(entry, .init = setup, .fini = down);

static void seal(ks_buf_t *b, ks_hash_t *key)
{
	static const char meta[] = "\"kernel\":\"gemm\",\"variant\":\"gemv_m1\"";
	static const uint8_t bytes[] = { 1, 2, 3, 4, 5, 6, 7, 8, 9 };

	memset(key->b, 0xab, sizeof key->b);
	ks_buf_init(b);
	cr_assert_eq(ks_entry_seal(&sec, key, meta, strlen(meta), bytes,
	    sizeof bytes, b), KS_OK);
}

Test(entry, keys_are_a_pair_and_the_ids_agree)
{
	struct stat st;

	cr_assert_eq(memcmp(pub.id, sec.id, sizeof pub.id), 0);
	cr_assert_eq(memcmp(pub.pk, sec.sk + 32, sizeof pub.pk), 0);
	cr_assert_eq(stat(secp, &st), 0);
	cr_assert_eq(st.st_mode & 0777, 0600);
	cr_assert_eq(stat(pubp, &st), 0);
	cr_assert_eq(st.st_mode & 0777, 0644);
}

Test(entry, keygen_never_replaces_a_key)
{
	char id[17], err[512];

	cr_assert_eq(ks_fleet_keygen(prefix, id, err, sizeof err), KS_E_IO);
	cr_assert(strstr(err, "exists; not replacing a key (remove it first"),
	    "%s", err);
}

Test(entry, a_secret_others_can_read_is_refused)
{
	char err[512], link[200];
	ks_fleet_sec_t s;

	cr_assert_eq(chmod(secp, 0640), 0);
	cr_assert_eq(ks_fleet_load_secret(secp, &s, err, sizeof err),
	    KS_E_DENIED);
	cr_assert(strstr(err, "chmod 0600"), "%s", err);
	cr_assert_eq(chmod(secp, 0400), 0);
	cr_assert_eq(ks_fleet_load_secret(secp, &s, err, sizeof err), KS_OK);
	snprintf(link, sizeof link, "%s/link.secret", dir);
	cr_assert_eq(symlink(secp, link), 0);
	cr_assert_eq(ks_fleet_load_secret(link, &s, err, sizeof err),
	    KS_E_DENIED);
	cr_assert(strstr(err, "symbolic link"), "%s", err);
	/* A public key where a secret one belongs, and the reverse. */
	cr_assert_eq(chmod(pubp, 0600), 0);
	cr_assert_eq(ks_fleet_load_secret(pubp, &s, err, sizeof err),
	    KS_E_INVAL);
	cr_assert_eq(ks_fleet_load_public(secp, &pub, err, sizeof err),
	    KS_E_INVAL);
}

Test(entry, what_was_sealed_opens)
{
	ks_entry_t e;
	ks_hash_t key;
	ks_buf_t b;
	char err[512];

	seal(&b, &key);
	cr_assert_eq(ks_entry_open(&pub, 1, b.data, b.len, &e, err,
	    sizeof err), KS_OK, "%s", err);
	cr_assert_eq(memcmp(e.key.b, key.b, sizeof key.b), 0);
	cr_assert_eq(e.meta_len, strlen("\"kernel\":\"gemm\",\"variant\":"
	    "\"gemv_m1\""));
	cr_assert_eq(e.len, 9);
	cr_assert_eq(e.bytes[8], 9);
	cr_assert_eq(e.signer, 0);
	ks_buf_close(&b);
}

/* Every single bit of the entry is covered: the key, the lengths, the
 * metadata, the bytes and the signature itself. */
Test(entry, any_changed_bit_is_refused)
{
	ks_entry_t e;
	ks_hash_t key;
	ks_buf_t b;
	char err[512];
	size_t i;
	int bit, rc;

	seal(&b, &key);
	for (i = 0; i < b.len; i++)
		for (bit = 0; bit < 8; bit++) {
			b.data[i] ^= (char)(1 << bit);
			rc = ks_entry_open(&pub, 1, b.data, b.len, &e, err,
			    sizeof err);
			cr_assert(rc == KS_E_DENIED || rc == KS_E_PROTO,
			    "byte %zu bit %d changed and still opened", i, bit);
			b.data[i] ^= (char)(1 << bit);
		}
	cr_assert_eq(ks_entry_open(&pub, 1, b.data, b.len - 1, &e, err,
	    sizeof err), KS_E_PROTO);
	cr_assert_eq(ks_entry_open(&pub, 1, b.data, b.len, &e, err,
	    sizeof err), KS_OK);
	ks_buf_close(&b);
}

Test(entry, another_fleets_entry_is_refused)
{
	char id[17], err[512], other[160], op[200];
	ks_fleet_pub_t keys[2];
	ks_entry_t e;
	ks_hash_t key;
	ks_buf_t b;

	seal(&b, &key);
	snprintf(other, sizeof other, "%s/other", dir);
	cr_assert_eq(ks_fleet_keygen(other, id, err, sizeof err), KS_OK);
	snprintf(op, sizeof op, "%s.public", other);
	cr_assert_eq(ks_fleet_load_public(op, &keys[0], err, sizeof err),
	    KS_OK);
	cr_assert_eq(ks_entry_open(keys, 1, b.data, b.len, &e, err,
	    sizeof err), KS_E_DENIED);
	cr_assert(strstr(err, "not one of"), "%s", err);
	/* Rotation: a reader with both keys opens it, signed by the second. */
	keys[1] = pub;
	cr_assert_eq(ks_entry_open(keys, 2, b.data, b.len, &e, err,
	    sizeof err), KS_OK);
	cr_assert_eq(e.signer, 1);
	/* The other key's id with this key's signature does not verify. */
	memcpy(b.data + 8, keys[0].id, KS_FLEET_ID_BYTES);
	cr_assert_eq(ks_entry_open(keys, 2, b.data, b.len, &e, err,
	    sizeof err), KS_E_DENIED);
	ks_buf_close(&b);
}

/* Opens LEN bytes at P, written to a file, as a bundle file: F's fd is
 * the caller's to close. */
static int open_file(ks_bundle_file_t *f, const void *p, size_t len,
    char *err)
{
	char path[128];
	int fd;

	snprintf(path, sizeof path, "%s/b.kspec", dir);
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	cr_assert(fd >= 0);
	cr_assert_eq(write(fd, p, len), (ssize_t)len);
	return ks_bundle_file_open(f, fd, len, err, 512);
}

Test(entry, bundle_files_are_walked_before_read_and_refused_when_cut)
{
	ks_buf_t b, bundle;
	ks_bundle_file_t f;
	ks_hash_t key;
	uint64_t len;
	char err[512], *got;

	seal(&b, &key);
	ks_buf_init(&bundle);
	ks_bundle_begin(&bundle, 2);
	ks_bundle_add(&bundle, &b);
	ks_bundle_add(&bundle, &b);
	cr_assert_eq(open_file(&f, bundle.data, bundle.len, err), KS_OK, "%s",
	    err);
	cr_assert_eq(f.count, 2);
	/* The first passed over unread, the second read as it was sealed. */
	cr_assert_eq(ks_bundle_file_peek(&f, &len, err, sizeof err), KS_OK);
	cr_assert_eq(len, b.len);
	cr_assert_eq(ks_bundle_file_take(&f, NULL, len, err, sizeof err),
	    KS_OK);
	cr_assert_eq(ks_bundle_file_peek(&f, &len, err, sizeof err), KS_OK);
	got = malloc(len);
	cr_assert_eq(ks_bundle_file_take(&f, got, len, err, sizeof err),
	    KS_OK);
	cr_assert_eq(memcmp(got, b.data, b.len), 0);
	cr_assert_eq(f.next, 2);
	/* Cut short after the walk: the read says so. */
	f.next = 1;
	f.at = 12 + 8 + b.len;
	cr_assert_eq(ftruncate(f.fd, (off_t)(bundle.len - 1)), 0);
	cr_assert_eq(ks_bundle_file_take(&f, got, len, err, sizeof err),
	    KS_E_PROTO);
	free(got);
	close(f.fd);
	/* Cut short, one byte too many, not a bundle: the walk says so. */
	cr_assert_eq(open_file(&f, bundle.data, bundle.len - 1, err),
	    KS_E_PROTO);
	cr_assert(strstr(err, "cut short at entry 1"), "%s", err);
	close(f.fd);
	ks_buf_append(&bundle, "x", 1);
	cr_assert_eq(open_file(&f, bundle.data, bundle.len, err), KS_E_PROTO);
	cr_assert(strstr(err, "1 bytes after"), "%s", err);
	close(f.fd);
	cr_assert_eq(open_file(&f, "kspecE1\n\0\0\0\0", 12, err),
	    KS_E_PROTO);
	cr_assert(strstr(err, "not a kspec bundle"), "%s", err);
	close(f.fd);
	ks_buf_close(&b);
	ks_buf_close(&bundle);
}
