 13:33:00 up 14:06,  0 user,  load average: 2.00, 1.83, 1.44
