/* Fake libdcmi.so: stands for Huawei's DCMI library (libdcmi.so from the Ascend driver) at its C ABI.
 * Prototypes and struct layouts copy dcmi_interface_api.h of Ascend/mind-cluster
 * (component/ascend-common/devmanager/dcmi). Values mirror the fixtures in tests/fixtures/ascend:
 * card 0 = one 910B2C chip (npu-smi_info_910B2C_23.0.3_no_procs.txt, NPU 0), card 3 = a 300I Duo with two
 * 310P3 chips (npu-smi_info_310P3_25.0.rc1.1_2chips_procs.txt, renumbered), chip 3-1 in Alarm with two
 * error codes. Environment switches, read at each call: FAKE_DCMI_INIT_FAIL=1 (dcmi_init fails),
 * FAKE_DCMI_HEALTH_FAIL=<card>-<dev> (that chip's health call fails), FAKE_DCMI_CARDS=<n> (only the first
 * n cards are listed). DCMI "not supported" is -8255 as the real library returns it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NOT_SUPPORT (-8255)

struct dcmi_pcie_info_all {
    unsigned int venderid, subvenderid, deviceid, subdeviceid;
    int domain;
    unsigned int bdf_busid, bdf_deviceid, bdf_funcid;
    unsigned char reserve[32];
};
struct dcmi_chip_info {
    unsigned char chip_type[32], chip_name[32], chip_ver[32];
    unsigned int aicore_cnt;
};
struct dcmi_hbm_info {
    unsigned long long memory_size;
    unsigned int freq;
    unsigned long long memory_usage;
    int temp;
    unsigned int bandwith_util_rate;
};
struct dcmi_get_memory_info_stru {
    unsigned long long memory_size, memory_available;
    unsigned int freq;
    unsigned long hugepagesize, hugepages_total, hugepages_free;
    unsigned int utiliza;
    unsigned char reserve[60];
};

static int is_910b(int card, int dev) { return card == 0 && dev == 0; }
static int valid(int card, int dev) { return is_910b(card, dev) || (card == 3 && (dev == 0 || dev == 1)); }

int dcmi_init(void) { const char *f = getenv("FAKE_DCMI_INIT_FAIL"); return (f && *f == '1') ? -8005 : 0; }

int dcmi_get_card_list(int *card_num, int *card_list, int list_len) {
    static const int cards[] = {0, 3};
    const char *lim = getenv("FAKE_DCMI_CARDS");
    int n = lim ? atoi(lim) : 2;
    if (n > 2) n = 2;
    if (list_len < n) return -8001;
    for (int i = 0; i < n; i++) card_list[i] = cards[i];
    *card_num = n;
    return 0;
}

int dcmi_get_device_num_in_card(int card, int *num) {
    if (card == 0) { *num = 1; return 0; }
    if (card == 3) { *num = 2; return 0; }
    return -8001;
}

int dcmi_get_device_pcie_info_v2(int card, int dev, struct dcmi_pcie_info_all *p) {
    if (!valid(card, dev)) return -8001;
    memset(p, 0, sizeof *p);
    p->domain = 0;
    p->bdf_busid = is_910b(card, dev) ? 0x5A : 0x83;
    return 0;
}

int dcmi_get_device_chip_info(int card, int dev, struct dcmi_chip_info *c) {
    if (!valid(card, dev)) return -8001;
    memset(c, 0, sizeof *c);
    strcpy((char *)c->chip_type, "Ascend");
    strcpy((char *)c->chip_name, is_910b(card, dev) ? "910B2C" : "310P3");
    strcpy((char *)c->chip_ver, "V1");
    return 0;
}

int dcmi_get_device_health(int card, int dev, unsigned int *health) {
    char want[32];
    const char *f = getenv("FAKE_DCMI_HEALTH_FAIL");
    snprintf(want, sizeof want, "%d-%d", card, dev);
    if (!valid(card, dev) || (f && strcmp(f, want) == 0)) return -8020;
    *health = (card == 3 && dev == 1) ? 2 : 0;
    return 0;
}

int dcmi_get_device_errorcode_v2(int card, int dev, int *count, unsigned int *codes, unsigned int len) {
    if (!valid(card, dev)) return -8001;
    *count = 0;
    if (card == 3 && dev == 1 && len >= 2) {
        codes[0] = 0xA4025021u;
        codes[1] = 0x8C03A000u;
        *count = 2;
    }
    return 0;
}

int dcmi_get_device_temperature(int card, int dev, int *t) {
    if (!valid(card, dev)) return -8001;
    *t = is_910b(card, dev) ? 53 : (dev == 0 ? 55 : 52);
    return 0;
}

int dcmi_get_device_power_info(int card, int dev, int *power) {
    if (!valid(card, dev)) return -8001;
    if (!is_910b(card, dev)) return NOT_SUPPORT; /* 310P: npu-smi prints NA */
    *power = 899; /* 0.1 W */
    return 0;
}

int dcmi_get_device_hbm_info(int card, int dev, struct dcmi_hbm_info *h) {
    if (!valid(card, dev)) return -8001;
    if (!is_910b(card, dev)) return NOT_SUPPORT;
    memset(h, 0, sizeof *h);
    h->memory_size = 65536;
    h->memory_usage = 3317;
    h->temp = 40;
    h->bandwith_util_rate = 7;
    return 0;
}

int dcmi_get_device_memory_info_v3(int card, int dev, struct dcmi_get_memory_info_stru *m) {
    if (!valid(card, dev)) return -8001;
    memset(m, 0, sizeof *m);
    if (is_910b(card, dev)) return 0; /* 910B2C: DDR 0 / 0 */
    m->memory_size = dev == 0 ? 44280 : 43693;
    m->memory_available = dev == 0 ? 44280 - 1175 : 43693 - 8322;
    m->utiliza = 3;
    return 0;
}

int dcmi_get_device_utilization_rate(int card, int dev, int type, unsigned int *rate) {
    if (!valid(card, dev)) return -8001;
    switch (type) {
    case 2: *rate = is_910b(card, dev) ? 0 : 12; return 0;      /* AI Core */
    case 3: *rate = 0; return 0;                                 /* AI CPU */
    case 4: *rate = is_910b(card, dev) ? 9 : 2 + dev; return 0; /* ctrl CPU */
    case 5: if (is_910b(card, dev)) return NOT_SUPPORT; *rate = 51; return 0; /* DDR bandwidth */
    default: return NOT_SUPPORT;
    }
}

int dcmi_get_device_frequency(int card, int dev, int type, unsigned int *mhz) {
    if (!valid(card, dev)) return -8001;
    if (type == 7) { *mhz = is_910b(card, dev) ? 1000 : 960; return 0; }
    if (type == 9) { *mhz = is_910b(card, dev) ? 1000 : 1080; return 0; }
    return NOT_SUPPORT;
}
