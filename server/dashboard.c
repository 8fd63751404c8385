/*
 * The dashboard page (dashboard.html) as bytes of the program: the page
 * needs no file at run time.  The Makefile builds this from the
 * repository's root, where the path below is found, and rebuilds it when
 * the page changes.
 */
__asm__(
"	.section .rodata\n"
"	.global ks_dashboard_html\n"
"	.type ks_dashboard_html, @object\n"
"	.balign 16\n"
"ks_dashboard_html:\n"
"	.incbin \"server/dashboard.html\"\n"
"ks_dashboard_html_end:\n"
"	.byte 0\n"
"	.global ks_dashboard_html_len\n"
"	.type ks_dashboard_html_len, @object\n"
"	.balign 4\n"
"ks_dashboard_html_len:\n"
"	.long ks_dashboard_html_end - ks_dashboard_html\n"
"	.text\n"
);
